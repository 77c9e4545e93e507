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

/// [`ChunkHasher`] that also keeps the chaining values of the chunk's
/// pieces of `piece` bytes (a power of two dividing the chunk size, aligned
/// in the file): the digests of the same file cut in `piece`-byte chunks,
/// computed with no more hashing than the chunk's own (the chunk's digest is
/// merged from them up BLAKE3's tree). A content-hash record so keeps
/// digests fine enough for a fan-out's smaller pieces.
pub struct PieceHasher {
    chunk_start: u64,
    chunk_len: u64,
    piece: u64,
    file_size: u64,
    chunk_size: u32,
    done: u64,
    hasher: blake3::Hasher,
    pieces: Vec<Digest>,
}

impl PieceHasher {
    /// Starts chunk `index` of a file of `file_size` bytes in `chunk_size`
    /// chunks, keeping digests of `piece`-byte pieces (`piece` is clamped
    /// to `1024..=chunk_size`).
    pub fn new(index: u32, chunk_size: u32, file_size: u64, piece: u32) -> Self {
        let cs = u64::from(chunk_size);
        let chunk_start = u64::from(index) * cs;
        let chunk_len = file_size.saturating_sub(chunk_start).min(cs);
        let piece =
            u64::from(piece.clamp(crate::MIN_CHUNK_SIZE, chunk_size.max(crate::MIN_CHUNK_SIZE)));
        let mut this = Self {
            chunk_start,
            chunk_len,
            piece,
            file_size,
            chunk_size,
            done: 0,
            hasher: blake3::Hasher::new(),
            pieces: Vec::new(),
        };
        this.hasher = this.piece_hasher(chunk_start);
        this
    }

    fn piece_hasher(&self, at: u64) -> blake3::Hasher {
        let mut h = blake3::Hasher::new();
        if self.file_size > self.piece {
            h.set_input_offset(at);
        }
        h
    }

    fn close_piece(&mut self) {
        let d = if self.file_size <= self.piece {
            *self.hasher.finalize().as_bytes()
        } else {
            self.hasher.finalize_non_root()
        };
        self.pieces.push(d);
    }

    /// Adds the next bytes of the chunk.
    pub fn update(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let room = (self.piece - self.done % self.piece) as usize;
            let n = room.min(data.len());
            self.hasher.update(&data[..n]);
            self.done += n as u64;
            data = &data[n..];
            if self.done.is_multiple_of(self.piece) && self.done < self.chunk_len {
                self.close_piece();
                self.hasher = self.piece_hasher(self.chunk_start + self.done);
            }
        }
    }

    /// The chunk's digest (equal to [`chunk_digest`] of all the bytes
    /// given) and its pieces' digests, in order.
    pub fn finalize(mut self) -> (Digest, Vec<Digest>) {
        self.close_piece();
        let chunk = if self.file_size <= u64::from(self.chunk_size) {
            root_from_digests(&self.pieces, self.piece as u32, self.file_size)
        } else {
            subtree_digest(&self.pieces, self.piece, 0, self.chunk_len)
        };
        (chunk.unwrap_or([0; 32]), self.pieces)
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
    fn piece_hasher_gives_the_chunk_digest_and_the_smaller_chunks_digests() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 31 % 251) as u8).collect();
        for size in [0usize, 1, 1000, 4096, 5000, 16384, 70_000, 300_000] {
            let file = &data[..size];
            for (cs, piece) in [
                (16384u32, 4096u32),
                (16384, 16384),
                (65536, 1024),
                (4096, 8192),
            ] {
                for (i, chunk) in file.chunks(cs as usize).enumerate() {
                    let mut h = PieceHasher::new(i as u32, cs, size as u64, piece);
                    for p in chunk.chunks(777) {
                        h.update(p);
                    }
                    let (d, pieces) = h.finalize();
                    assert_eq!(
                        d,
                        chunk_digest(chunk, i as u32, cs, size as u64),
                        "{size} {cs} {piece}"
                    );
                    let piece = piece.min(cs) as usize;
                    let first = i * cs as usize / piece;
                    let want: Vec<Digest> = chunk
                        .chunks(piece)
                        .enumerate()
                        .map(|(k, p)| {
                            chunk_digest(p, (first + k) as u32, piece as u32, size as u64)
                        })
                        .collect();
                    assert_eq!(pieces, want, "{size} {cs} {piece}");
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
