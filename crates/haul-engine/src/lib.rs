//! haul's transfer engine: the parts of moving a file that do not depend on
//! the network.
//!
//! - [`hash`]: chunk digests and whole-file BLAKE3 on the BLAKE3 tree.
//! - [`source`]: the [`source::Source`] abstraction and local trees.
//! - [`destination`]: the receiving root — path safety, staging, atomic commit.
//! - [`partial`]: a file being received, with its resume log.
//! - [`event`]: what a transfer reports to the people and programs watching it.

pub mod destination;
pub mod event;
pub mod hash;
pub mod partial;
pub mod source;

pub use destination::{Destination, Prepared, ReceiveError};
pub use event::{Event, Observer};
pub use haul_root;
pub use partial::{ChunkVerdict, PartialFile};
pub use source::{split_ranges, EntryIter, LocalTree, Source, SourceEntry, SourceError};
