//! `--max-transfer` over a fan-out: one cut for every node.
//!
//! A push stops starting files once its connections moved the limit
//! (rclone's soft cutoff). A fan-out sends its dataset many times — one
//! send per child of the client, per stripe, again to a re-routed node and
//! to repair one — and the nodes relay what they received to each other.
//! If each send stopped on its own, each node would stop at its own point.
//! So the cut is a place in the dataset's order, the same for every send:
//! while the client's own bytes (`moved`, counting every send) are below
//! the limit, entries go out; the first send that finds the limit reached
//! fixes the cut at the furthest entry any send had taken by then. Every
//! send — those behind, and those started later — offers exactly the
//! entries up to it, so every node ends with the same files, and the next
//! run sends the rest.

use std::sync::{Arc, Mutex};

use haul_engine::EntryIter;
use haul_run::summary::Tally;

use crate::dataset::Dataset;
use crate::NodeError;

/// Where the cut is, shared by every send of the dataset.
#[derive(Debug, Default)]
struct Cut {
    /// The furthest entry (by its place in the dataset) any send took.
    furthest: Option<usize>,
    /// Entries after this one are not offered (`Some` once the limit was
    /// reached).
    at: Option<usize>,
}

/// A dataset cut once the client moved `limit` bytes.
pub(super) struct Cutoff {
    inner: Arc<dyn Dataset>,
    limit: u64,
    tally: Arc<Tally>,
    cut: Arc<Mutex<Cut>>,
}

impl Cutoff {
    /// `inner`, cut once `tally` (the client's, every send's bytes) moved
    /// `limit`.
    pub fn new(inner: Arc<dyn Dataset>, limit: u64, tally: Arc<Tally>) -> Self {
        Self {
            inner,
            limit,
            tally,
            cut: Arc::default(),
        }
    }

    /// The files the cut left out, if it left any (counted in a walk of
    /// the dataset again): a run whose last entry reached the limit ends
    /// whole, as a push's does.
    pub fn left(&self) -> Option<usize> {
        let at = self.cut.lock().ok()?.at?;
        let walk = self.inner.entries().ok()?;
        let left = walk
            .enumerate()
            .skip(at + 1)
            .filter(|(_, item)| {
                matches!(item, Ok(src) if src.entry.kind == haul_proto::EntryKind::File)
            })
            .count();
        (left > 0).then_some(left)
    }
}

/// Whether entry `index` goes out, and the cut fixed once the limit was
/// reached.
fn offered(cut: &Mutex<Cut>, index: usize, reached: bool) -> bool {
    let Ok(mut cut) = cut.lock() else {
        return false;
    };
    if cut.at.is_none() && reached {
        // Whatever a send took before stays in: those sends are under way
        // to their nodes, and every other send catches up to it.
        cut.at = Some(cut.furthest.unwrap_or(0));
    }
    match cut.at {
        Some(at) => index <= at,
        None => {
            cut.furthest = Some(cut.furthest.map_or(index, |f| f.max(index)));
            true
        }
    }
}

impl Dataset for Cutoff {
    fn entries(&self) -> Result<EntryIter, NodeError> {
        let (cut, tally, limit) = (self.cut.clone(), self.tally.clone(), self.limit);
        let walk = self.inner.entries()?;
        Ok(Box::new(walk.enumerate().map_while(move |(i, item)| {
            offered(&cut, i, tally.moved() >= limit).then_some(item)
        })))
    }

    fn tops(&self) -> Result<Vec<String>, NodeError> {
        self.inner.tops()
    }

    fn mirrored(&self) -> Option<&str> {
        self.inner.mirrored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_send_stops_at_the_furthest_entry_taken_when_the_limit_was_reached() {
        let cut = Mutex::new(Cut::default());
        // Two sends: one ahead (entries 0..=5), one behind (0..=2).
        for i in 0..=5 {
            assert!(offered(&cut, i, false));
        }
        for i in 0..=2 {
            assert!(offered(&cut, i, false));
        }
        // The limit is reached: the send ahead stops after what it took.
        assert!(!offered(&cut, 6, true));
        // The one behind goes on to the same place, and no further,
        // whatever it sees of the limit.
        for i in 3..=5 {
            assert!(offered(&cut, i, true), "{i}");
        }
        assert!(!offered(&cut, 6, false));
        // A send started later (a re-route, a repair) offers the same.
        assert!((0..=5).all(|i| offered(&cut, i, true)));
        assert!(!offered(&cut, 6, true));
        assert_eq!(cut.lock().unwrap().at, Some(5));
    }

    #[test]
    fn a_limit_reached_before_anything_went_out_leaves_the_first_entry() {
        let cut = Mutex::new(Cut::default());
        assert!(offered(&cut, 0, true));
        assert!(!offered(&cut, 1, true));
    }
}
