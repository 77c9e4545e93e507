//! Directories of the receiving side held open while sessions write, by
//! their path relative to the root, so that the per-file calls of many small
//! files (stat, create, link) name one component relative to a held
//! descriptor instead of resolving the whole path each time.
//!
//! The cache keeps descriptors, never names: a hit gives the directory that
//! was resolved (beneath the root, no symlink on the way) when it was put
//! here. If its name is swapped for a symlink meanwhile, the descriptor
//! still names that directory, wherever it is now — never what the name
//! points to. The cache is emptied when the last session ends, so a new
//! run of sessions sees the tree as it is then, and when a held directory
//! turns out removed (no links left: an operator deleted it while a
//! session lingered), so that it is made again instead of written into.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use haul_root::Dir;

/// At most this many directories stay open (files of one directory usually
/// arrive together, so a small cache keeps nearly every hit).
const CAPACITY: usize = 64;

/// A directory's identity (device, inode): what the destination's `known_dirs` keys on.
pub(crate) type DirId = (u64, u64);

/// One held directory.
#[derive(Debug, Clone)]
pub(crate) struct HeldDir {
    pub(crate) dir: Arc<Dir>,
    pub(crate) id: DirId,
}

/// Held directories by relative path (`""` is the root).
#[derive(Debug, Default)]
pub(crate) struct DirCache {
    dirs: Mutex<HashMap<String, HeldDir>>,
}

impl DirCache {
    pub(crate) fn get(&self, rel: &str) -> Option<HeldDir> {
        let mut dirs = self.dirs.lock().ok()?;
        let held = dirs.get(rel).cloned()?;
        if held.dir.meta().is_ok_and(|m| m.nlink == 0) {
            // Removed, and so maybe its parents: resolve everything anew.
            dirs.clear();
            return None;
        }
        Some(held)
    }

    pub(crate) fn insert(&self, rel: String, held: HeldDir) {
        if let Ok(mut d) = self.dirs.lock() {
            if d.len() >= CAPACITY {
                d.clear();
            }
            d.insert(rel, held);
        }
    }

    /// Closes every held directory.
    pub(crate) fn clear(&self) {
        if let Ok(mut d) = self.dirs.lock() {
            d.clear();
        }
    }
}
