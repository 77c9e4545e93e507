//! One cached record: a file's BLAKE3 (per chunk and whole) and the
//! identity of the version it was taken from, in a compact binary form
//! that embeds that identity, so whoever reads it — another haul, another
//! site's tool — can tell whether it still describes the file.
//!
//! Layout, version 1 (all integers little-endian; 116 + 32·n bytes):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | `b"HB3"` and the layout version, `1` |
//! | 4 | 4 | chunk size (a power of two, 1 KiB – 64 MiB) |
//! | 8 | 8·3 | device, inode, size |
//! | 32 | 12 | mtime: seconds (i64), nanoseconds (u32) |
//! | 44 | 12 | ctime when hashed: seconds, nanoseconds |
//! | 56 | 12 | written: the clock just before the record was written |
//! | 68 | 12 | stamped until: for a record set on the file itself, the latest its own write's ctime may be (`written` + 5 ms; a wider window is refused); 0 in a store |
//! | 80 | 4 | n, the number of chunk digests (0 for a file of one chunk or none) |
//! | 84 | 32 | the whole file's BLAKE3 (what `b3sum` prints) |
//! | 116 | 32·n | chunk digests: BLAKE3 chaining values at each chunk's offset ([`haul_proto::digest`]) |
//!
//! Setting an extended attribute moves the file's ctime. A record set on
//! the file itself therefore states the window its own write falls in
//! (`written` less one timestamp tick, to `stamped until`; the writer takes
//! the record off the trusted path if its write missed it), and a ctime in
//! that window is the record's own; a record in a store leaves the file
//! untouched and its ctime must be the one hashed.

use haul_proto::digest::{root_from_digests, subtree_digest, valid_chunk_size};
use haul_proto::Digest;
use haul_root::identity::TIMESTAMP_GRAIN;
use haul_root::FileIdentity;

/// The magic and layout version.
const MAGIC: [u8; 4] = *b"HB3\x01";
/// Bytes before the chunk digests.
const HEADER: usize = 116;
/// Most chunk digests a record holds (a file's chunk count is bounded the
/// same way: [`haul_proto::digest::MAX_CHUNKS`]).
pub const MAX_DIGESTS: usize = 1 << 16;

/// A time as seconds and nanoseconds since the epoch.
pub type Stamp = (i64, u32);

/// What a record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The chunk size the digests are for.
    pub chunk_size: u32,
    /// The version hashed (ctime as it was when hashed).
    pub identity: FileIdentity,
    /// The clock just before the record was written.
    pub written: Stamp,
    /// For a record set on the file itself, the latest its own write's
    /// ctime may be: that ctime lies in `written - tick ..= stamped`.
    pub stamped: Option<Stamp>,
    /// The whole file's BLAKE3.
    pub root: Digest,
    /// Chunk digests; empty when the file has at most one chunk (its
    /// digest is then the root).
    pub chunks: Vec<Digest>,
}

/// Nanoseconds since the epoch (saturating; times before it are 0).
fn nanos((s, ns): Stamp) -> i128 {
    i128::from(s) * 1_000_000_000 + i128::from(ns)
}

impl Record {
    /// Whether this record describes the file whose identity is `now`.
    ///
    /// Device, inode, size and mtime must be the ones hashed; the ctime the
    /// one hashed, or for a record on the file one its own write explains —
    /// unless `ignore_ctime`. Git's racy rule: a record written within a
    /// timestamp tick of the file's mtime is not trusted (a write in that
    /// tick would have left the mtime as it was).
    pub fn describes(&self, now: &FileIdentity, ignore_ctime: bool) -> bool {
        let id = &self.identity;
        if (id.dev, id.ino, id.size, id.mtime) != (now.dev, now.ino, now.size, now.mtime) {
            return false;
        }
        let grain = TIMESTAMP_GRAIN.as_nanos() as i128;
        if nanos(id.mtime) + grain >= nanos(self.written) {
            return false;
        }
        ignore_ctime || now.ctime == id.ctime || self.stamped_at(now.ctime)
    }

    /// Whether `ctime` lies in the window this record's own write on the
    /// file fell in.
    pub fn stamped_at(&self, ctime: Stamp) -> bool {
        let Some(until) = self.stamped else {
            return false;
        };
        let grain = TIMESTAMP_GRAIN.as_nanos() as i128;
        let c = nanos(ctime);
        nanos(self.written) - grain <= c && c <= nanos(until) && c > nanos(self.identity.ctime)
    }

    /// Whether the only difference between `before` and `after` is this
    /// record being set on the file: `before` is the version hashed and
    /// `after` differs from it in a ctime the record's write explains.
    pub fn explains(&self, before: &FileIdentity, after: &FileIdentity) -> bool {
        let mut same = *after;
        same.ctime = before.ctime;
        same == *before && *before == self.identity && self.stamped_at(after.ctime)
    }

    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + 32 * self.chunks.len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&self.chunk_size.to_le_bytes());
        let id = &self.identity;
        for v in [id.dev, id.ino, id.size] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for (s, ns) in [
            id.mtime,
            id.ctime,
            self.written,
            self.stamped.unwrap_or((0, 0)),
        ] {
            out.extend_from_slice(&s.to_le_bytes());
            out.extend_from_slice(&ns.to_le_bytes());
        }
        out.extend_from_slice(&(self.chunks.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.root);
        for d in &self.chunks {
            out.extend_from_slice(d);
        }
        out
    }

    /// Reads a record; `None` for anything that is not a well-formed one of
    /// this layout (another version, cut, a chunk count that does not fit
    /// the size, digests that do not merge to the root).
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let mut r = Reader(bytes);
        if r.take::<4>()? != MAGIC {
            return None;
        }
        let chunk_size = u32::from_le_bytes(r.take()?);
        if !valid_chunk_size(chunk_size) {
            return None;
        }
        let (dev, ino, size) = (r.u64()?, r.u64()?, r.u64()?);
        let (mtime, ctime, written, stamped) = (r.stamp()?, r.stamp()?, r.stamp()?, r.stamp()?);
        let n = u32::from_le_bytes(r.take()?) as usize;
        let root = r.take::<32>()?;
        if n > MAX_DIGESTS || r.0.len() != 32 * n {
            return None;
        }
        let chunks: Vec<Digest> =
            r.0.chunks_exact(32)
                .filter_map(|c| c.try_into().ok())
                .collect();
        let count = size.div_ceil(u64::from(chunk_size));
        let consistent = if count <= 1 {
            chunks.is_empty()
        } else {
            chunks.len() as u64 == count
                && root_from_digests(&chunks, chunk_size, size) == Some(root)
        };
        // A window wider than a write can take would make any ctime the
        // record's own.
        let window = nanos(stamped) - nanos(written);
        let narrow =
            stamped == (0, 0) || (0..=super::STAMP_WINDOW.as_nanos() as i128).contains(&window);
        (consistent && narrow).then(|| Self {
            chunk_size,
            identity: FileIdentity {
                dev,
                ino,
                size,
                mtime,
                ctime,
            },
            written,
            stamped: (stamped != (0, 0)).then_some(stamped),
            root,
            chunks,
        })
    }

    /// The chunk digests of this file cut in `chunk_size` chunks, derived
    /// by merging this record's up BLAKE3's tree; `None` when `chunk_size`
    /// is smaller than the record's (those digests cannot be derived).
    pub fn digests_for(&self, chunk_size: u32) -> Option<Vec<Digest>> {
        let size = self.identity.size;
        let cs = u64::from(chunk_size);
        let count = size.div_ceil(cs);
        if count <= 1 {
            return Some(if count == 0 {
                Vec::new()
            } else {
                vec![self.root]
            });
        }
        if chunk_size == self.chunk_size {
            return Some(self.chunks.clone());
        }
        if chunk_size < self.chunk_size || self.chunks.is_empty() {
            return None;
        }
        let own = u64::from(self.chunk_size);
        (0..count)
            .map(|i| {
                let offset = i * cs;
                subtree_digest(&self.chunks, own, offset, cs.min(size - offset))
            })
            .collect()
    }
}

/// Reads fixed-size fields from the front of a slice.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }

    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }

    fn stamp(&mut self) -> Option<Stamp> {
        let s = i64::from_le_bytes(self.take()?);
        let ns = u32::from_le_bytes(self.take()?);
        (ns < 1_000_000_000).then_some((s, ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use haul_proto::digest::chunk_digest;

    fn record_of(data: &[u8], cs: u32) -> Record {
        let size = data.len() as u64;
        let chunks: Vec<Digest> = data
            .chunks(cs as usize)
            .enumerate()
            .map(|(i, c)| chunk_digest(c, i as u32, cs, size))
            .collect();
        Record {
            chunk_size: cs,
            identity: FileIdentity {
                dev: 3,
                ino: 77,
                size,
                mtime: (1_000, 5),
                ctime: (1_000, 9),
            },
            written: (2_000, 0),
            stamped: Some((2_000, 500)),
            root: *blake3::hash(data).as_bytes(),
            chunks: if chunks.len() > 1 { chunks } else { Vec::new() },
        }
    }

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 253) as u8).collect()
    }

    #[test]
    fn records_round_trip_and_anything_else_is_refused() {
        for n in [0usize, 1, 1024, 1025, 10_000] {
            let r = record_of(&data(n), 1024);
            let bytes = r.encode();
            assert_eq!(bytes.len(), HEADER + 32 * r.chunks.len());
            assert_eq!(Record::decode(&bytes), Some(r.clone()));
            for cut in 0..bytes.len() {
                assert_eq!(Record::decode(&bytes[..cut]), None, "cut at {cut}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(Record::decode(&longer), None);
        }
        let mut bytes = record_of(&data(10_000), 1024).encode();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert_eq!(
            Record::decode(&bytes),
            None,
            "digests that do not merge to the root"
        );
        let wide = Record {
            stamped: Some((2_100, 0)),
            ..record_of(&data(10_000), 1024)
        };
        assert_eq!(
            Record::decode(&wide.encode()),
            None,
            "a window no write takes"
        );
        let mut bytes = record_of(&data(10_000), 1024).encode();
        bytes[3] = 2;
        assert_eq!(Record::decode(&bytes), None, "another layout version");
    }

    #[test]
    fn larger_chunk_sizes_are_derived_and_smaller_ones_are_not() {
        let d = data(70_000);
        let r = record_of(&d, 1024);
        for cs in [1024u32, 2048, 4096, 65536, 131072] {
            let want: Vec<Digest> = d
                .chunks(cs as usize)
                .enumerate()
                .map(|(i, c)| chunk_digest(c, i as u32, cs, d.len() as u64))
                .collect();
            assert_eq!(r.digests_for(cs), Some(want), "chunk size {cs}");
        }
        assert_eq!(record_of(&d, 4096).digests_for(1024), None);
    }

    #[test]
    fn a_record_describes_only_the_version_it_was_taken_from() {
        let r = record_of(&data(5000), 1024);
        let id = r.identity;
        assert!(r.describes(&id, false));
        let mut own_write = id;
        own_write.ctime = (2_000, 100);
        assert!(r.describes(&own_write, false), "the record's own write");
        assert!(r.explains(&id, &own_write));
        let mut later = id;
        later.ctime = (2_001, 0);
        assert!(!r.describes(&later, false), "a ctime after the record");
        assert!(r.describes(&later, true), "unless ctime is ignored");
        assert!(!r.explains(&id, &later));
        for changed in [
            FileIdentity { ino: 78, ..id },
            FileIdentity { dev: 4, ..id },
            FileIdentity { size: 5001, ..id },
            FileIdentity {
                mtime: (1_000, 6),
                ..id
            },
        ] {
            assert!(!r.describes(&changed, true), "{changed:?}");
        }
        // Racy: written within a tick of the mtime.
        let racy = Record {
            written: (1_000, 5 + 1_000_000),
            ..r.clone()
        };
        assert!(!racy.describes(&id, false));
        // In a store (nothing stamped), only the ctime hashed.
        let stored = Record { stamped: None, ..r };
        assert!(stored.describes(&id, false) && !stored.describes(&own_write, false));
    }
}
