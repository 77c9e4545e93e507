//! haul's transfer engine: the parts of moving a file that do not depend on
//! the network.
//!
//! - [`attrs`]: owners, groups, xattrs and ACLs (`-o -g -X -A`), read and applied.
//! - [`hash`]: chunk digests and whole-file BLAKE3 on the BLAKE3 tree.
//! - [`source`]: the [`source::Source`] abstraction and local trees.
//! - [`destination`]: the receiving root — path safety, staging, atomic commit.
//! - [`partial`]: a file being received, with its resume log.
//! - [`prune`]: staging files of abandoned transfers, removed after a TTL.
//! - [`mirror`]: `--delete` at a local destination, beneath a held root.
//! - [`backup`]: `--backup`, what a transfer replaces or deletes kept aside.
//! - [`itemize`]: `-i`, rsync's change strings, for receivers and dry runs.
//! - [`hard_links`]: `-H`, further names of a file found and linked again.
//! - [`one_file`]: scp's and rsync's rule for a `DEST` that names one file.
//! - [`content`]: whole-file BLAKE3 of one version that existed, the one seam.
//! - [`hash_cache`]: BLAKE3 per chunk and file kept by the version's identity.
//! - [`chunks`]: chunk sources (local files, bytes, files still being
//!   received) and sinks, which take only verified chunks.

pub mod attrs;
pub mod backup;
pub mod chunks;
pub mod content;
pub mod destination;
mod dir_cache;
pub mod filtered;
pub mod hard_links;
pub mod hash_cache;
pub mod itemize;
pub mod mirror;
pub mod one_file;
/// Chunk digests and whole-file hashes: the protocol's, in [`haul_proto::digest`].
pub use haul_proto::digest as hash;
pub mod partial;
pub mod prune;
pub mod quick_check;
mod receive_error;
pub mod source;

pub use chunks::{
    ChunkRead, ChunkSink, ChunkSource, Confirmation, LocalFile, MemorySource, VerifiedChunk,
};
pub use destination::{Destination, Prepared};
pub use filtered::EntryFilter;
pub use haul_filter::{self, Filter};
pub use haul_root;
pub use one_file::OneFile;
pub use partial::{ChunkVerdict, PartialFile};
pub use receive_error::ReceiveError;
pub use source::{split_ranges, EntryIter, LocalTree, Source, SourceEntry, SourceError};
